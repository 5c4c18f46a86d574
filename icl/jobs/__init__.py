"""What every job runs on: device and threads (runtime), forked workers (parallel), where a job's time
went (timing), what code made a table (provenance), the errors a user sees (errors)."""
