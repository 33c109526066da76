"""A config form generated from pydantic models: introspection (``spec``), text conversions (``values``), one
row widget per kind of field (``fields``) and the form itself (``model_form``)."""
