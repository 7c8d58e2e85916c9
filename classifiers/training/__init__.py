"""specroute: training the classifier (corpus builder, training, evaluation, labels from outcomes)."""
