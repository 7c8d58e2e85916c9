"""specroute: training the classifier (corpus builder, training, evaluation, logged labels)."""
