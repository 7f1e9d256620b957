"""Cross-cutting: health probes, the OpenAPI schema, the error format, settings strictness."""

import os
import subprocess
import sys

import pytest
import yaml
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_healthz(anon_client):
    assert anon_client.get("/healthz").json() == {"status": "ok"}


def test_readyz_checks_postgres_and_redis(anon_client):
    response = anon_client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"postgres": "ok", "redis": "ok"}


def test_readyz_reports_a_dead_redis_by_name_only(anon_client, settings, caplog):
    settings.REDIS_URL = "redis://sluice-cache-user:hunter2@127.0.0.1:1/0"  # nothing on port 1
    response = anon_client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable",
                               "checks": {"postgres": "ok", "redis": "unavailable"}}
    # The reason is for operators, in the log: not for whoever probes.
    assert "127.0.0.1" not in response.content.decode()
    assert any("Redis does not answer" in r.message and r.exc_info for r in caplog.records)


def test_openapi_schema_documents_every_endpoint(operator_client):
    response = operator_client.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    paths = schema["paths"]
    for path in ["/api/v1/orgs/", "/api/v1/orgs/{org_id}/transitions/", "/api/v1/pools/",
                 "/api/v1/allocations/", "/api/v1/orgs/{org_id}/api-keys/"]:
        assert path in paths, path


def test_docs_page_is_served_without_a_cdn(operator_client):
    page = operator_client.get("/api/docs/").content.decode()
    assert "swagger-ui" in page
    assert "cdn" not in page.lower()


def test_malformed_json_is_a_400_in_the_error_format(operator_client):
    response = operator_client.generic("POST", "/api/v1/orgs/", "{not json",
                                       content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_request"


def test_unknown_sluice_variable_is_refused():
    env = {**os.environ, "SLUICE_DEBGU": "1", "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env,
                            capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "SLUICE_DEBGU" in result.stderr


def test_malformed_boolean_is_refused():
    env = {**os.environ, "SLUICE_SECURE_COOKIES": "sometimes",
           "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env,
                            capture_output=True, text=True, check=False)
    assert "is not a boolean" in result.stderr


def test_the_models_match_the_migrations():
    """Partitioned usage events are made by SQL (quotas migration 0006): Django's idea of the
    models must still agree with the migrations, or the next makemigrations would fight them."""
    from django.core.management import call_command

    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_openapi_schema_builds_without_warnings(tmp_path):
    """Each warning was a lie in the schema (14 bodies shared one `InputRequest` component, the
    operator token was no security scheme): the build fails on any new one."""
    call_command("spectacular", "--fail-on-warn", "--validate", "--file",
                 str(tmp_path / "schema.yaml"))


def test_openapi_schema_tells_the_truth(operator_client):
    schema = operator_client.get("/api/schema/", {"format": "json"}).json()
    components, paths = schema["components"]["schemas"], schema["paths"]

    def body(path, method):
        ref = paths[path][method]["requestBody"]["content"]["application/json"]["schema"]
        return components[ref["$ref"].rsplit("/", 1)[1]]

    # Each view's own body, not one `InputRequest` for all (it documented an allocation).
    assert set(body("/api/v1/orgs/", "post")["properties"]) == {"name", "slug"}
    assert "guaranteed_tps" in body("/api/v1/allocations/", "post")["properties"]
    # Paginated lists are documented as the page they are.
    page = paths["/api/v1/orgs/"]["get"]["responses"]["200"]["content"]["application/json"]
    page = components[page["schema"]["$ref"].rsplit("/", 1)[1]]
    assert set(page["properties"]) == {"count", "next", "previous", "results"}
    assert {"limit", "offset"} <= {p["name"] for p in paths["/api/v1/orgs/"]["get"]["parameters"]}
    assert paths["/api/v1/pools/"]["get"]["responses"]["200"]["content"]["application/json"][
        "schema"]["type"] == "array"  # not paginated
    # Nullable fields say so.
    assert components["ApiKeyOutput"]["properties"]["created_by"]["nullable"] is True
    # The operator token is a scheme; errors are the one shape, on every operation.
    assert schema["components"]["securitySchemes"]["operatorToken"]["bearerFormat"] == \
        "op_<lookup>_<secret>"
    assert set(components["Error"]["properties"]) == {"error"}
    for path, operations in paths.items():
        for method, operation in operations.items():
            codes = {code for code in operation["responses"] if code.startswith("4")}
            assert "401" in codes, (method, path)
            if "{" in path:
                assert "404" in codes, (method, path)
            if not path.startswith("/api/gateway/"):
                for code in codes:
                    content = operation["responses"][code]["content"]["application/json"]
                    assert content["schema"] == {"$ref": "#/components/schemas/Error"}


@pytest.mark.parametrize("query", ["limit=abc", "limit=0", "limit=501", "offset=-5",
                                   "offset=1.5", "limit=2&limit=3"])
def test_malformed_page_parameters_are_a_400(operator_client, query):
    """Found by schemathesis (negative data): DRF's paginator read a bad `limit` or `offset` as
    the default, so a typo silently answered the first page."""
    response = operator_client.get(f"/api/v1/orgs/?{query}")
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {query.split("=")[0]}


def test_page_parameters_page(operator_client):
    for name in ("A", "B", "C"):
        operator_client.post("/api/v1/orgs/", {"name": name}, format="json")
    page = operator_client.get("/api/v1/orgs/?limit=2&offset=1").json()
    assert (page["count"], [o["name"] for o in page["results"]]) == (3, ["B", "C"])
