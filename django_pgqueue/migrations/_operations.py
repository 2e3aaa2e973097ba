"""Operations shared by this app's migrations (a module the migration loader skips:
its name starts with an underscore)."""

from __future__ import annotations

from django.db import migrations, models


def plain_integers(
    table: str, model_name: str, fields: dict[str, models.Field]
) -> migrations.SeparateDatabaseAndState:
    """``fields`` become ``IntegerField``s; their own CHECKs (``<table>_<column>_check``,
    named so by PostgreSQL when the column was made) are dropped, and on the way back
    made again with the same names and conditions."""
    return migrations.SeparateDatabaseAndState(
        state_operations=[
            migrations.AlterField(model_name=model_name, name=name, field=field)
            for name, field in fields.items()
        ],
        database_operations=[
            migrations.RunSQL(
                sql=f'ALTER TABLE "{table}" DROP CONSTRAINT "{table}_{name}_check"',
                reverse_sql=(
                    f'ALTER TABLE "{table}" ADD CONSTRAINT "{table}_{name}_check"'
                    f' CHECK ("{name}" >= 0)'
                ),
            )
            for name in fields
        ],
    )
