"""The page: server-rendered HTML (readable without JavaScript), SVG plots, own static assets."""
