"""Ways to look at stored runs: pure read-side views (`views.py`), the reward plot (`plot.py`), inline SVG
charts (`svg.py`) and the trajectory viewer web app (`app.py`, served by `agentrl ui`)."""
