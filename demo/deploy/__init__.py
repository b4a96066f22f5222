"""Deployment tools, apart from the app's layers: `python -m demo.deploy.space` stages and pushes
the Hugging Face Space. Nothing in the app imports this package."""
