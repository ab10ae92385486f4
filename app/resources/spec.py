"""The OpenAPI document's marshmallow plugin: a union of schemas (marshmallow-oneofschema's
OneOfSchema) is documented as oneOf its schemas, with a discriminator that maps each value of
its type field to its schema, as OpenAPI 3.0 describes polymorphism; and a body field's
default is the server's to apply, said in its description but not given as `default`."""

from typing import Any

from apispec.ext.marshmallow import MarshmallowPlugin, OpenAPIConverter
from marshmallow import Schema
from marshmallow_oneofschema import OneOfSchema


class UnionConverter(OpenAPIConverter):
    """apispec's converter, with a OneOfSchema as oneOf its type schemas (each a component,
    referred to by $ref) and their discriminator, and body properties without `default`."""

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

    def fields2jsonschema(self, fields: Any, *, partial: Any = None) -> dict[str, Any]:
        """A body's properties, without the `default` apispec reads from a field's
        load_default. Generators read a property's `default` as "always present": a
        TypeScript client from openapi-typescript makes it a required property, so a request
        that leaves it out would not type-check, and a Python client from
        openapi-python-client sends it. The server fills it in when a request leaves it out,
        and its description says the value. (Query parameters keep theirs: they are not built
        here, and the generators leave a parameter with a default optional.)"""
        jsonschema = super().fields2jsonschema(fields, partial=partial)
        for prop in jsonschema["properties"].values():
            prop.pop("default", None)
        return jsonschema


class SpecPlugin(MarshmallowPlugin):
    """apispec's marshmallow plugin with unions (the plugin's documented Converter hook)."""

    Converter = UnionConverter
