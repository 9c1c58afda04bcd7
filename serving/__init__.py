"""The prediction and recommendation service: FastAPI app (`serving.app.create_app`), its HTTP
client (`serving.client.PerfcastClient`) and the `perfcast serve|recommend|allocate|place`
commands."""
