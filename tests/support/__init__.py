"""What the tests share, in plain modules that hold no tests (pytest collects none of them):
``exports`` (generated Label Studio exports), ``local_http`` and ``s3_server`` (servers on
127.0.0.1), ``launchers`` (torchrun launchers), ``compare`` (batch and sample equality),
``batches`` (padded image batches), ``device_audit`` (the accelerators' rules as a dispatch
mode), ``docs`` (code blocks of the docs), ``latents`` (the latents tests' encode arguments)
and ``stores`` (sample stores). Fixtures live in the nearest conftest.py; no test module
imports another (tests/test_layout.py)."""
