"""JSON schema of the canonical plan, for users who validate plans in other languages."""

PLAN_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "GroundedPlan",
    "type": "object",
    "required": ["instruction", "image_size", "actions"],
    "properties": {
        "instruction": {"type": "string"},
        "image_size": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2},
        "actions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"enum": ["grasp", "place", "open", "close"]},
                    "object": {"type": "string"},
                    "target": {"type": "string"},
                    "bbox": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4},
                    "point": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
                    "target_3d": {  # present once the plan is back-projected
                        "type": "object",
                        "required": ["frame", "position"],
                        "properties": {
                            "frame": {"type": "string"},
                            "position": {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3},
                            "yaw": {"type": ["number", "null"]},
                            "width": {"type": ["number", "null"]},
                            "normal": {"type": ["array", "null"], "items": {"type": "number"}, "minItems": 3,
                                       "maxItems": 3},
                            "method": {"type": "string"},
                            "confidence": {"type": "number"},
                        },
                    },
                },
            },
        },
        "reason": {"type": "string"},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "model": {"type": "string"},
        "raw_response": {"type": "string"},
    },
}
