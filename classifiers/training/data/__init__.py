"""The training-corpus builder: pinned real data from packages, relabelled by the reply."""
