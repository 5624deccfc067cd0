"""Asset jobs and their schedules."""
