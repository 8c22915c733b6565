"""The studio API key now belongs to the agents app (``agents.0001`` takes it over with
its table): state only, the database is not touched."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_api_keys"),
        ("agents", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ApiKey")],
            database_operations=[],
        ),
    ]
