from django.db import migrations


class Migration(migrations.Migration):
    """The run_schedule permission: running a schedule now is its own right, apart
    from pausing it."""

    dependencies = [("django_pgqueue", "0015_mq_last_read_at")]

    operations = [
        migrations.AlterModelOptions(
            name="schedule",
            options={
                "ordering": ["name"],
                "permissions": [
                    ("pause_schedule", "Can pause and resume schedules"),
                    ("run_schedule", "Can run a schedule now, outside its cron"),
                ],
                "verbose_name": "schedule",
                "verbose_name_plural": "schedules",
            },
        ),
    ]
