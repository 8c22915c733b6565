"""The studio API key moves here from accounts (its table stays ``accounts_apikey``):
state only, the database is not touched."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("accounts", "0002_api_keys"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiKey",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(max_length=100)),
                        (
                            "key_id",
                            models.CharField(
                                help_text="Not secret: finds the key.", max_length=16, unique=True
                            ),
                        ),
                        (
                            "secret_hash",
                            models.CharField(
                                help_text="SHA-256 of the whole key; never shown.", max_length=64
                            ),
                        ),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_keys",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "API key",
                        "db_table": "accounts_apikey",
                        "ordering": ["-created_at", "-id"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("name", ""), _negated=True),
                                name="apikey_has_a_name",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("secret_hash__regex", "^[0-9a-f]{64}$")),
                                name="apikey_secret_is_a_sha256",
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
