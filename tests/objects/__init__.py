"""Object-store contract tests: local, memory and S3 (moto, SeaweedFS)."""
