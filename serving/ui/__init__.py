"""The web dashboard under /ui: champion models, a recommendation form, the live cluster."""
