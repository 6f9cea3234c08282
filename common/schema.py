"""OpenAPI (drf-spectacular) description of Concord's own authentication classes."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class StrictBasicScheme(OpenApiAuthenticationExtension):
    """StrictBasicAuthentication is HTTP Basic (it only refuses NUL characters earlier)."""

    target_class = "common.security.StrictBasicAuthentication"
    name = "basicAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "basic"}
