"""How results are stored: the tables' schemas and parquet I/O (io), atomic writes (files)."""
