"""The learner: served requests as observations, summed into the learned state that decides."""
