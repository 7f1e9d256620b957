"""The shared presentation pieces of both sites: how numbers are written, the chart component's
scale and words, messages placed beside the form they answer, the landing page."""

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib import messages
from django.contrib.messages.storage.fallback import FallbackStorage
from django.template import Context, Template
from django.test import RequestFactory

from sluice.charts import Limit, Series, TimeChart
from sluice.messages import flash
from sluice.templatetags.numbers import count, ms, percent, rate


def test_numbers_have_separators_and_integers_stay_integers():
    assert count(345600000) == "345,600,000"
    assert count(32.0) == "32"
    assert count(64573.0) == "64,573"
    assert count(Decimal("2.5")) == "3"  # halves up, like the rest of the house
    assert rate(573.94) == "573.9"
    assert rate(121000) == "121,000.0"
    assert percent(0.5637) == "56%" and percent(0.5637, 1) == "56.4%"
    assert ms(412.6) == "413 ms"
    assert count(None) == rate(None) == percent(None) == ms(None) == "–"


def _chart(values, limits):
    start = datetime(2026, 11, 30, 10, tzinfo=UTC)
    return TimeChart(key="t", title="Tokens per second", unit="tokens/s",
                     times=[start + timedelta(minutes=i) for i in range(len(values))],
                     step_seconds=60, decimals=1, series=[Series("Tokens/s", values)],
                     limits=[Limit(name, value) for name, value in limits])


def test_chart_scale_shows_the_data_and_names_limits_far_above_it():
    chart = _chart([100.0, 300.0, 200.0], [("Guaranteed", 500), ("Capacity", 121_000)])
    assert [lim.name for lim in chart.limits_shown] == ["Guaranteed"]  # within 4x the data
    assert [lim.name for lim in chart.limits_above] == ["Capacity"]
    assert chart.y_max == pytest.approx(500 * 1.15)
    assert chart.summary == "Tokens/s: 200.0 tokens/s on average, highest 300.0."
    data = chart.as_json()
    assert data["x"][1] - data["x"][0] == 60 and data["limits"] == [
        {"name": "Guaranteed", "value": 500}]


def test_chart_without_data_draws_every_limit():
    chart = _chart([0.0, 0.0], [("Guaranteed", 500), ("Capacity", 121_000)])
    assert len(chart.limits_shown) == 2 and chart.y_max == pytest.approx(121_000 * 1.15)


def test_chart_tag_writes_json_the_summary_and_the_limits():
    chart = _chart([100.0, 300.0], [("Guaranteed", 500), ("Capacity", 121_000)])
    html = Template("{% load charts %}{% chart c %}").render(Context({"c": chart}))
    data = html.split('<script id="chart-t-data" type="application/json">')[1]
    assert json.loads(data.split("</script>")[0])["series"][0]["values"] == [100.0, 300.0]
    assert 'role="img" aria-label="Tokens per second. Tokens/s: 200.0' in html
    assert 'data-limit="Guaranteed" data-value="500">Guaranteed 500</span>' in html
    assert "Capacity (121,000 tokens/s) is above the scale." in html


def test_messages_show_at_their_place_and_the_rest_at_the_top():
    request = RequestFactory().get("/")
    request.session = {}
    request._messages = FallbackStorage(request)
    flash(request, messages.SUCCESS, "Allocation granted.", at="allocations")
    flash(request, messages.INFO, "Welcome back.")
    template = Template('{% load flash %}<top>{% messages_at %}</top>'
                        '<alloc>{% messages_at "allocations" %}</alloc>')
    html = template.render(Context({"request": request}))
    top, alloc = html.split("<alloc>")
    assert "Welcome back." in top and "Allocation granted." not in top
    assert 'class="alert alert-success" role="status">Allocation granted.' in alloc


@pytest.mark.django_db
def test_landing_page_and_favicon(client):
    page = client.get("/").content.decode()
    for href in ('href="/portal/"', 'href="/admin/"', 'href="/api/docs/"'):
        assert href in page
    favicon = client.get("/favicon.ico", follow=True)
    assert favicon.status_code == 200 and favicon.redirect_chain[0][0] == "/static/favicon.ico"


def test_the_worker_prints_emails_as_they_are():
    """The console email backend prints every email; Celery's default logs each printed line
    as a WARNING (the demo's 21 seed emails were 21 warnings)."""
    from config.celery import app

    assert app.conf.worker_redirect_stdouts is False
