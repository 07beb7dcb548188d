"""Graph passes: whole-model rewrites run before planning (:mod:`.normalize`)."""
