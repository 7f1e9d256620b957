"""`{% chart spec %}`: a TimeChart (sluice/charts.py) as a figure that static/charts.js draws.
The data travels as JSON (json_script); the figure carries a text summary for screen readers
and for anyone without JavaScript, and names the limits that lie above the scale."""

from django import template

register = template.Library()


@register.inclusion_tag("charts/chart.html")
def chart(spec):
    def described(limits):
        return [{"name": lim.name, "value": lim.value, "text": spec.format_limit(lim.value)}
                for lim in limits]

    return {"spec": spec, "data": spec.as_json(), "data_id": f"chart-{spec.key}-data",
            "lines": described(spec.limits_shown), "above": described(spec.limits_above)}
