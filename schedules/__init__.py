"""TIR schedule templates for fused groups, one dlight-style ScheduleRule per pattern.

Rules that do not match a function return None and fall through to dlight's rules (Fallback last).
"""
