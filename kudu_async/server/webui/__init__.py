"""The admin server's HTML pages: Jinja2 templates, one CSS file, and the helpers that choose between a
page for people (browsers) and the JSON the page is made from (curl, scripts, tests)."""
