"""`python -m ccweb_index` is the `ccweb-index` command."""

from ccweb_index.server.cli import main

if __name__ == "__main__":
    main()
