"""The indexer: reads cc-web session files and writes the SQLite index. It never writes the files."""
