from django.contrib.auth import views as auth_views
from django.urls import path

from common import views
from common.forms import LoginForm

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon, name="favicon"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(
            redirect_authenticated_user=True, authentication_form=LoginForm
        ),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/me/", views.account, name="account"),
    path(
        "accounts/me/tokens/<int:token_id>/revoke/",
        views.account_token_revoke,
        name="account-token-revoke",
    ),
]
