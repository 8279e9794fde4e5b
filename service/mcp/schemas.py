"""JSON Schemas for the MCP tools' inputs, made from the API's own OpenAPI 3.0 document.

An operation's request body (or its query and path parameters, gathered into one object)
becomes a self-contained JSON Schema 2020-12: references inlined (a recursive one carried
once under ``$defs``), ``nullable`` and boolean exclusive bounds rewritten, a lone ``allOf``
merged. Alongside it comes where each argument goes in the request (path, query or body).
"""

from __future__ import annotations

from typing import Any

JSON_MIME = "application/json"
BODY_KEY = "\0body"  # Operation.parameters: where the request body's fields go

SCHEMA_MAPS = ("properties", "patternProperties")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_ONE = ("items", "additionalProperties", "not")
ANNOTATIONS = ("title", "description", "default")


class SchemaMaker:
    """JSON Schemas (2020-12) from an OpenAPI 3.0 document's schemas: references inlined
    (a recursive one carried once under ``$defs``), ``nullable`` and boolean exclusive
    bounds rewritten, a lone ``allOf`` (how apispec describes a nested field) merged."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.defs: dict[str, Any] = {}

    def resolve(self, ref: str) -> Any:
        node: Any = self.spec
        for part in ref.removeprefix("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def schema(self, node: dict[str, Any], seen: tuple[str, ...] = ()) -> dict[str, Any]:
        if "$ref" in node:
            ref, name = node["$ref"], node["$ref"].rsplit("/", 1)[-1]
            rest = {k: v for k, v in node.items() if k != "$ref"}
            if ref not in seen:
                return self.schema({**self.resolve(ref), **rest}, (*seen, ref))
            if name not in self.defs:
                self.defs[name] = {}  # against re-entry while it is made
                self.defs[name] = self.schema(self.resolve(ref), (ref,))
            return _json_schema_keywords({"$ref": f"#/$defs/{name}", **rest})
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in SCHEMA_MAPS:
                out[key] = {k: self.schema(v, seen) for k, v in value.items()}
            elif key in SCHEMA_LISTS:
                out[key] = [self.schema(v, seen) for v in value]
            elif key in SCHEMA_ONE and isinstance(value, dict):
                out[key] = self.schema(value, seen)
            else:
                out[key] = value
        return _json_schema_keywords(out)

    def finish(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {**schema, "$defs": dict(self.defs)} if self.defs else schema


def _json_schema_keywords(out: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0's own keywords as JSON Schema 2020-12 says them."""
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if out.get(exclusive) is True and bound in out:
            out[exclusive] = out.pop(bound)
        elif isinstance(out.get(exclusive), bool):
            del out[exclusive]
    if "example" in out:
        out["examples"] = [out.pop("example")]
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and not set(all_of[0]) & set(out):
        out = {**all_of[0], **{k: v for k, v in out.items() if k != "allOf"}}
    if not out.pop("nullable", False):
        return out
    if isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    notes = {k: out.pop(k) for k in ANNOTATIONS if k in out}
    return {"anyOf": [out, {"type": "null"}], **notes}


def request_schema(spec: dict[str, Any], method: str, path: str) -> tuple[Any, dict[str, str]]:
    """The operation's input as one object schema, and where each argument goes."""
    item = spec["paths"][path]
    operation = item[method]
    maker = SchemaMaker(spec)
    params = {}  # the operation's own override the path's
    for given in [*item.get("parameters", []), *operation.get("parameters", [])]:
        param = maker.resolve(given["$ref"]) if "$ref" in given else given
        params[param["name"], param["in"]] = param
    schema: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    places: dict[str, str] = {}
    body = operation.get("requestBody", {}).get("content", {}).get(JSON_MIME)
    if body is not None:
        schema = maker.schema(body["schema"])
        places[BODY_KEY] = "body"
    properties, required = schema.setdefault("properties", {}), list(schema.get("required", []))
    for (name, where), param in params.items():
        if where not in ("path", "query"):
            continue
        properties[name] = maker.schema(param.get("schema", {}))
        if "description" in param:
            properties[name]["description"] = param["description"]
        if param.get("required") or where == "path":
            required.append(name)
        places[name] = where
    if required:
        schema["required"] = sorted(set(required), key=required.index)
    return maker.finish(schema), places
