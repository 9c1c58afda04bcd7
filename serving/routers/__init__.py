"""One router per resource: predictions, decisions (recommend/allocate/place), models, health."""
