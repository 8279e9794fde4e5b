"""The chat assistants' way in: ``rightsize mcp`` serves the API's operations as
Model Context Protocol tools (server), with JSON Schemas made from the OpenAPI document
(schemas) and answers summarised for a chat (answers)."""
