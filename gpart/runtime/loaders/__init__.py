"""The loaders a training loop iterates: nodes, links and layer-wise inference."""
