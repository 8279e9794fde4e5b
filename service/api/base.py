"""flask-smorest wired for this service: problem+json errors and strict argument parsing."""

from __future__ import annotations

import functools
import http
import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import flask_smorest
from flask_smorest.spec import prepare_response
from marshmallow import RAISE, Schema, fields, validate
from webargs.flaskparser import FlaskParser
from werkzeug.exceptions import BadRequest, HTTPException

from service.api import bodies
from service.errors import PROBLEM_MIME, from_http_exception
from service.security import BEARER, requires

F = TypeVar("F", bound=Callable[..., Any])


class FieldErrorSchema(Schema):
    location = fields.String(metadata={"description": "where the field was: json, query, path"})
    field = fields.String(metadata={"description": "the field, dotted for nested fields"})
    message = fields.String(metadata={"description": "what was wrong and what was expected"})


class ProblemSchema(Schema):
    """RFC 9457 problem details, the body of every error response."""

    type = fields.String(metadata={"description": "URI identifying the kind of problem"})
    title = fields.String(metadata={"description": "short summary of the kind of problem"})
    status = fields.Integer(metadata={"description": "HTTP status code"})
    detail = fields.String(metadata={"description": "what went wrong in this request"})
    errors = fields.List(fields.Nested(FieldErrorSchema), metadata={"description": "bad fields"})
    suggestions = fields.List(
        fields.String(), metadata={"description": "close matches to an unknown name"}
    )
    value = fields.Raw(metadata={"description": "the value not found or not accepted"})
    kind = fields.String(
        metadata={"description": "what is wrong with an uploaded trace (not-a-trace, ...)"}
    )
    limit_s = fields.Float(metadata={"description": "the time limit a computation passed"})
    limit_bytes = fields.Integer(metadata={"description": "the size limit a body passed"})


class Api(flask_smorest.Api):
    """Api whose errors, and their documentation, are ``application/problem+json``.

    The OpenAPI document is written when it is first read (``/openapi.json``, the MCP
    tools, ``rightsize openapi``), not as the app is made: the blueprints' routes are
    registered at once, their documentation, and whatever :meth:`later` was given, in the
    same order on first use of :attr:`spec`. Writing it took two thirds of ``create_app``.
    """

    ERROR_SCHEMA = ProblemSchema

    def __init__(self, app: Any = None, *, spec_kwargs: Any = None) -> None:
        self._deferred: list[Callable[[], None]] = []
        self._writing = threading.RLock()
        super().__init__(app, spec_kwargs=spec_kwargs)

    @property
    def spec(self) -> Any:
        """The document, with everything deferred written into it first."""
        with self._writing:
            while self._deferred:
                self._deferred.pop(0)()
        return self._spec

    @spec.setter
    def spec(self, value: Any) -> None:
        self._spec = value

    def later(self, document: Callable[[Any], None]) -> None:
        """Call ``document(spec)`` when the document is first read, in turn."""
        self._deferred.append(lambda: document(self._spec))

    def register_blueprint(self, blp: Any, *, parameters: Any = None, **options: Any) -> None:
        """flask-smorest's registration, its documentation deferred (see the class)."""
        name = options.get("name", blp.name)
        self._app.extensions["flask-smorest"]["blp_name_to_api"][name] = self
        self._app.register_blueprint(blp, **options)

        def document() -> None:
            blp.register_views_in_doc(self, self._app, self._spec, name=name, parameters=parameters)
            self._spec.tag({"name": name, "description": blp.description})

        self._deferred.append(document)

    def handle_http_exception(self, error: HTTPException) -> Any:
        return from_http_exception(error)

    def _register_responses(self) -> None:
        for status in http.HTTPStatus:
            response: dict[str, Any] = {"description": status.phrase}
            if status >= 400:
                response["schema"] = self.ERROR_SCHEMA
                prepare_response(response, self.spec, PROBLEM_MIME)
            self.spec.components.response(status.name, response, lazy=True)
        default = {"description": "Default error response", "schema": self.ERROR_SCHEMA}
        prepare_response(default, self.spec, PROBLEM_MIME)
        self.spec.components.response("DEFAULT_ERROR", default, lazy=True)


class Parser(FlaskParser):
    """webargs's parser, with a body that decodes but cannot be read (an integer of more
    than 4,300 digits: Python refuses to convert it) a 400 like any other bad JSON, and
    one instance of each argument schema (webargs makes one a request, with its nested
    schemas: a third of the time of a cached answer). Loading keeps no state in the
    instance, so threads share it."""

    def _get_schema(self, argmap: Any, req: Any) -> Schema:
        if isinstance(argmap, type) and issubclass(argmap, Schema):
            return schema_instance(argmap)
        schema: Schema = super()._get_schema(argmap, req)
        return schema

    def _raw_load_json(self, req: Any) -> Any:
        try:
            return super()._raw_load_json(req)
        except json.JSONDecodeError:
            raise
        except ValueError as exc:
            raise BadRequest(f"the request body is not usable JSON: {exc}") from None


@functools.cache
def schema_instance(cls: type[Schema]) -> Schema:
    return cls()


class Blueprint(flask_smorest.Blueprint):
    """Blueprint whose argument schemas reject unknown fields in every location, and whose
    ``/v1`` operations document the 429 every client may get (the rate limit, a client's
    share of the compute processes)."""

    ARGUMENTS_PARSER = Parser(unknown=RAISE)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prepare_doc_cbks.append(self._prepare_limits_doc)

    def _prepare_limits_doc(self, doc: dict[str, Any], _: Any, **__: Any) -> dict[str, Any]:
        if (self.url_prefix or "").startswith("/v1"):
            doc.setdefault("responses", {})["429"] = http.HTTPStatus(429).name
        return doc

    def arguments(self, schema: Any, *, location: str = "json", **kwargs: Any) -> Any:
        """flask-smorest's; a method whose arguments are the JSON body takes JSON only,
        up to :data:`service.api.bodies.JSON_BODY_LIMIT` (documented: 413, 415)."""
        parsed = super().arguments(schema, location=location, **kwargs)
        if location != "json":
            return parsed
        return lambda method: self.body()(parsed(method))

    def body(
        self, types: tuple[str, ...] | None = bodies.JSON, limit: int | str = bodies.JSON_BODY_LIMIT
    ) -> Callable[[F], F]:
        """Mark a view method as taking a body of ``types`` (None: any) up to ``limit``
        bytes (or the setting of that name), documented as 413 beyond it and 415 for
        other types (:mod:`service.api.bodies`)."""

        def mark(method: F) -> F:
            documented = self.problem(413)(method)
            if types is not None:
                documented = self.problem(415)(documented)
            return bodies.mark(documented, bodies.BodyRule(types, limit))

        return mark

    def problem(self, status: int) -> Any:
        """Document an error response of this status (problem+json)."""
        return self.alt_response(status, schema=ProblemSchema, content_type=PROBLEM_MIME)

    def needs_key(self, role: str) -> Callable[[F], F]:
        """Mark a view method as needing an API key of ``role``, documented as such (the
        bearer scheme, 401 without a good key, 403 without the role)."""

        def mark(method: F) -> F:
            documented = self.doc(security=[{BEARER: []}])(method)
            documented = self.problem(401)(self.problem(403)(documented))
            return requires(role)(documented)

        return mark


class StrictBoolean(fields.Boolean):
    """JSON ``true`` or ``false`` and nothing else: marshmallow's Boolean also takes 0, 1,
    "yes" and "on", which the contract's ``type: boolean`` does not. ``query``: the value
    is text, as in a query string, where a boolean is ``true`` or ``false``."""

    def __init__(self, *, query: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.query = query

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> bool:
        if self.query and value in ("true", "false"):
            return bool(value == "true")
        if not self.query and isinstance(value, bool):
            return value
        raise self.make_error("invalid", input=value)


def exclusive_bounds(_: Any, field: fields.Field, **__: Any) -> dict[str, Any]:
    """apispec writes a Range's bounds as inclusive whatever it says: say which are not
    (OpenAPI 3.0's boolean ``exclusiveMinimum`` / ``exclusiveMaximum``)."""
    found: dict[str, Any] = {}
    for validator in field.validators:
        if isinstance(validator, validate.Range):
            if validator.min is not None and not validator.min_inclusive:
                found["exclusiveMinimum"] = True
            if validator.max is not None and not validator.max_inclusive:
                found["exclusiveMaximum"] = True
    return found


def stated_additional_properties(_: Any, field: fields.Field, **__: Any) -> dict[str, Any]:
    """apispec writes a Dict's ``additionalProperties`` from its values field, over what
    the field's metadata says: the metadata (a closed set of keys) has the last word."""
    stated = field.metadata.get("additionalProperties")
    return {} if stated is None else {"additionalProperties": stated}
