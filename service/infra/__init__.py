"""The service's infrastructure, under its features: caches and the embedded store, files
written whole, API keys, metrics, the compute processes and their fair line, local jobs and
uploads. Nothing here imports the API, the app or the features above it."""
