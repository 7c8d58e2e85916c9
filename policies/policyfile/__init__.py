"""The policy file as declared: its schema, named pools and arms, rewrites, machine priors."""
