"""ccweb-index: cc-web's MCP tools answered from an SQLite index of the sessions directory.

The repository root is this package: `indexer/`, `server/` and `migrations/` install as
`ccweb_index.indexer`, `ccweb_index.server` and `ccweb_index.migrations` (see pyproject.toml's
package-dir), so nothing else of those names is shadowed in the user's environment.
"""
