"""The web dashboard: static assets (index.html, app.js, style.css) served at ``/ui/``."""
