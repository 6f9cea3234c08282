from django.contrib.auth import views as auth_views
from django.urls import path

from common import views

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("accounts/login/", views.LoginView.as_view(), name="login"),
    path("accounts/sso/login/", views.sso_login, name="sso-login"),
    path("accounts/sso/callback/", views.sso_callback, name="sso-callback"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/me/", views.account, name="account"),
    path(
        "accounts/me/tokens/<int:token_id>/revoke/",
        views.account_token_revoke,
        name="account-token-revoke",
    ),
]
