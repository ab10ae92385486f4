"""The dashboard's forms (Flask-WTF: fields, their validation and the CSRF token)."""

from flask_wtf import FlaskForm
from wtforms import EmailField, IntegerField, PasswordField, SelectChoice, SelectField, StringField
from wtforms.validators import DataRequired, InputRequired, Length, NumberRange, Regexp

from app.resources.guards import NUL_MESSAGE
from app.services import users as user_service

# No text field holds a NUL: no database stores one (PostgreSQL refuses it outright).
NO_NUL = Regexp(r"^[^\x00]*$", message=NUL_MESSAGE)

ROLE_CHOICES = [
    SelectChoice("viewer", "Viewer (reads only)"),
    SelectChoice("admin", "Admin (everything but users)"),
    SelectChoice("owner", "Owner (everything, users too)"),
]


class SignInForm(FlaskForm):
    email = EmailField("Email", validators=[DataRequired(), Length(max=254), NO_NUL])
    password = PasswordField("Password", validators=[DataRequired(), Length(max=1024), NO_NUL])


class CreateKeyForm(FlaskForm):
    name = StringField("Name", validators=[DataRequired(), Length(max=100), NO_NUL])
    scope = SelectField(
        "Scope", choices=[SelectChoice("full", "Full access"), SelectChoice("read", "Read only")]
    )
    expires = SelectField(
        "Expires",
        choices=[
            SelectChoice("", "Never"),
            SelectChoice("30", "In 30 days"),
            SelectChoice("90", "In 90 days"),
            SelectChoice("365", "In 365 days"),
        ],
    )


class AddUserForm(FlaskForm):
    email = EmailField("Email", validators=[DataRequired(), Length(max=254), NO_NUL])
    role = SelectField("Role", choices=ROLE_CHOICES, default="viewer")
    password = PasswordField(
        "Initial password",
        validators=[
            DataRequired(),
            Length(min=user_service.MIN_PASSWORD_LENGTH, max=user_service.MAX_PASSWORD_LENGTH),
            NO_NUL,
        ],
    )


class RoleForm(FlaskForm):
    role = SelectField("Role", choices=ROLE_CHOICES)


# The largest threshold the database's integer column holds.
MAX_THRESHOLD = 2**31 - 1


class ThresholdForm(FlaskForm):
    minutes = IntegerField(
        "Low-balance threshold (minutes)",
        validators=[
            InputRequired("Enter a number of minutes, 0 or more."),
            NumberRange(0, MAX_THRESHOLD, "Enter a whole number of minutes, 0 or more."),
        ],
    )


# A WhatsApp Business account's id and secrets, as the API takes them
# (app.resources.whatsapp.schemas).
WABA_ID = Regexp(r"^[0-9]{1,64}$", message="Enter the account's numeric id from Meta.")
VISIBLE_ASCII = Regexp(
    r"^[\x21-\x7e]+$", message="Printable ASCII characters without spaces, as Meta gives it."
)
ACCESS_TOKEN = [DataRequired(), Length(min=8, max=4096), VISIBLE_ASCII]


class LinkWhatsAppForm(FlaskForm):
    waba_id = StringField("WhatsApp Business account id", validators=[DataRequired(), WABA_ID])
    access_token = PasswordField("Access token", validators=ACCESS_TOKEN)
    app_secret = PasswordField(
        "App secret", validators=[DataRequired(), Length(min=8, max=256), VISIBLE_ASCII]
    )
    label = StringField("Label (optional)", validators=[Length(max=100), NO_NUL])


class WhatsAppTokenForm(FlaskForm):
    access_token = PasswordField("New access token", validators=ACCESS_TOKEN)
