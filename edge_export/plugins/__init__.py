"""The plugin registries, at the bottom of the layers: targets and the options they declare
(``target_registry``), and the report sections targets and tasks declare (``report_sections``).
Plugins register into them from above; lower layers (options, reports) read them without
importing any plugin."""
