"""Costs by role: the simulated customer's tokens and cost beside the agent's.

Runs stored before this kept each customer message's tokens on its event only: their
totals are summed from those events. Their customer cost stays empty (unpriced), as no
price was recorded for it.
"""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce


def sum_customer_tokens(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    RunEvent = apps.get_model("runs", "RunEvent")

    def total(field):
        events = (
            RunEvent.objects.filter(run=OuterRef("pk"), kind="customer")
            .values("run")
            .annotate(total=Sum(field))
            .values("total")
        )
        return Coalesce(Subquery(events), 0)

    Run.objects.update(
        user_prompt_tokens=total("prompt_tokens"),
        user_completion_tokens=total("completion_tokens"),
    )


class Migration(migrations.Migration):
    dependencies = [("runs", "0004_review_labels")]

    operations = [
        migrations.AlterField(
            model_name="run",
            name="cost_usd",
            field=models.DecimalField(
                blank=True,
                decimal_places=6,
                help_text="The agent's calls (τ²'s agent_cost); empty when unpriced.",
                max_digits=12,
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="user_prompt_tokens",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="run",
            name="user_completion_tokens",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="run",
            name="user_cost_usd",
            field=models.DecimalField(
                blank=True,
                decimal_places=6,
                help_text="The customer's calls; empty when unpriced.",
                max_digits=12,
                null=True,
            ),
        ),
        migrations.RunPython(sum_customer_tokens, migrations.RunPython.noop),
    ]
