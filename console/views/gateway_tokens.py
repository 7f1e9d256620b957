"""Console page for gateway tokens: the credentials gateways present to the hook. Creating one
shows its secret once, in this response only (it is stored as a digest); revoking one stops
the gateways that use it within the hook's cache time."""

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.views.decorators.http import require_POST

from console import permissions as perm
from console.forms import GatewayTokenForm, ReasonForm
from console.selectors import gateway_token_get, gateway_tokens_all
from console.views.pages import _render
from quotas.hook.gateway_tokens import gateway_token_create, gateway_token_revoke
from sluice.errors import DomainError
from sluice.messages import flash, redirect_at


@permission_required(perm.VIEW_GATEWAY_TOKENS, raise_exception=True)
def gateway_tokens(request, *, site, form=None, created=None, status=200):
    return _render(request, site, "console/gateway_tokens.html", {
        "tokens": gateway_tokens_all(), "form": form or GatewayTokenForm(), "created": created,
        "can_add": request.user.has_perm(perm.ADD_GATEWAY_TOKEN),
        "can_revoke": request.user.has_perm(perm.REVOKE_GATEWAY_TOKEN),
    }, status=status)


@require_POST
@permission_required(perm.ADD_GATEWAY_TOKEN, raise_exception=True)
def gateway_token_add(request, *, site):
    form = GatewayTokenForm(request.POST)
    if not form.is_valid():
        return gateway_tokens(request, site=site, form=form, status=422)
    token, secret = gateway_token_create(name=form.cleaned_data["name"], actor=request.user)
    # Rendered into this response and never kept: a reload cannot show it again.
    return gateway_tokens(request, site=site, created={"token": token, "secret": secret},
                          status=201)


@require_POST
@permission_required(perm.REVOKE_GATEWAY_TOKEN, raise_exception=True)
def gateway_token_revoke_view(request, *, site, token_id: int):
    token = gateway_token_get(token_id=token_id)
    form = ReasonForm(request.POST)
    form.is_valid()
    try:
        gateway_token_revoke(token=token, actor=request.user,
                             reason=form.cleaned_data.get("reason", ""))
    except DomainError as error:
        flash(request, messages.ERROR, error.message, at="tokens")
    else:
        flash(request, messages.SUCCESS, f"{token.name} (gw_{token.lookup}…) is revoked: "
                                         "gateways using it are refused within 10 seconds.",
              at="tokens")
    return redirect_at("admin:console_gateway_tokens", at="tokens")
