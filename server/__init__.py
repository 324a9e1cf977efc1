"""The server: answers the two MCP tools from the index, re-checking the files behind each answer."""
