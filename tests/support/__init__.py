"""Test tooling: fault injection (private clusters, proxies, PgBouncer, network
namespaces), misbehaving and recording HTTP receivers, tracing fixtures."""
