"""The download manager: a model from the Hugging Face hub into the hub cache, planned, resumable, verified and
stoppable (:mod:`holodesk.download.manager`). Below the policies: it knows repos and files, not models."""
