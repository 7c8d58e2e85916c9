"""The decision, pure and per request: pin, allowed instances, arm, soonest predicted finish."""
