"""The store: what any store offers (backend) and its two engines, SQLite and PostgreSQL, with
their schemas, migrations, portable SQL, retiring of facts and backups; the SQL writers."""
