"""The OpenAPI document's marshmallow plugin: a union of schemas (marshmallow-oneofschema's
OneOfSchema) is documented as oneOf its schemas, with a discriminator that maps each value of
its type field to its schema, as OpenAPI 3.0 describes polymorphism."""

from typing import Any

from apispec.ext.marshmallow import MarshmallowPlugin, OpenAPIConverter
from marshmallow import Schema
from marshmallow_oneofschema import OneOfSchema


class UnionConverter(OpenAPIConverter):
    """apispec's converter, with a OneOfSchema as oneOf its type schemas (each a component,
    referred to by $ref) and their discriminator."""

    def schema2jsonschema(self, schema: Schema) -> dict[str, Any]:
        if not isinstance(schema, OneOfSchema):
            return super().schema2jsonschema(schema)
        variants = schema.type_schemas.items()
        refs = {name: self.resolve_nested_schema(each) for name, each in variants}
        return {
            "oneOf": list(refs.values()),
            "discriminator": {
                "propertyName": schema.type_field,
                "mapping": {name: ref["$ref"] for name, ref in refs.items()},
            },
        }


class SpecPlugin(MarshmallowPlugin):
    """apispec's marshmallow plugin with unions (the plugin's documented Converter hook)."""

    Converter = UnionConverter
