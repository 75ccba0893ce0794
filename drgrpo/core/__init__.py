"""What every layer uses (imports only the standard library at import time).

Modules, each importing only the ones listed before it:
- `models`: which model a name means (prepared short names, local folders, hub ids), checked before loading.
"""
