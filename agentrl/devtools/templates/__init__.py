"""The files `agentrl envs new` writes, as files: `common/` (every plugin), `guess/` (the pure-Python game)
and `lookup/` (the sandboxed one). `agentrl.devtools.scaffold` maps each to its path in the new plugin.

What this is: real Python (and TOML, Markdown, YAML) that ruff and mypy check as code, written for a plugin
named `envname` (package `agentrl_envname`, class stem `Envname`, distribution `agentrl-env-envname`, env id
`envname/Envname-v0`); rendering replaces those words with the new plugin's names, the words `ENVNAME_GAME`,
`ENVNAME_FLAG` and `ENVNAME_LAYOUT` with the game's description, the `--sandboxed` flag and the file list,
and keeps a line that ends in `# only --sandboxed` (without that comment) only in sandboxed plugins.
`ruff.toml` here lints them as the rendered plugin's own ruff does (`agentrl` third-party, the plugin's
package first-party).

What this is not: importable code. The subpackages exist so that each file has a module name of its own for
mypy; nothing imports them (their `agentrl_envname` imports exist only once rendered).
"""
