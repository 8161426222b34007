"""Seeing a running job: its dataflow graph laid out and drawn as SVG (:mod:`raytide.ui.layout`,
:mod:`raytide.ui.svg`), the page's JSON document built from ``job.stats()`` samples
(:mod:`raytide.ui.document`), and the web server that serves the page and the document
(:mod:`raytide.ui.server`). Nothing here knows the driver: it is handed plans, stats
dictionaries and callables returning documents (``raytide.driver.watch`` does that).
"""
