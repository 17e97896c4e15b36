"""The `cleanrl-plus` commands (cli.py dispatches): compare, sweep, report (with stats.py's rliable statistics), bench,
eval and remedies. They run the agents and read their run directories; the library they use is cleanrl_plus/,
plasticity/ and envs/, which never import them."""
