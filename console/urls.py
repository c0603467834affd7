from django.contrib.auth import views as auth_views
from django.urls import path, register_converter

from console.api import api
from console.health import healthz
from console.metrics import metrics
from console.views import evaluation, evolution, experiments, harness, serving, training, workspace
from workspaces.identifiers import IdentifierConverter

# Names go through the identifier converter, so rows stored before names were validated still resolve.
register_converter(IdentifierConverter, "ident")
ws = "w/<ident:ws>/"
h = ws + "harnesses/<ident:name>/"

urlpatterns = [
    path("", workspace.home, name="home"),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Invitations: a new member sets their password with a one-time link (Django's reset token).
    path("accounts/invite/<uidb64>/<token>/", auth_views.PasswordResetConfirmView.as_view(
        success_url="/accounts/invite/done/"), name="password_reset_confirm"),
    path("accounts/invite/done/", auth_views.PasswordResetCompleteView.as_view(), name="password_reset_complete"),
    path("workspaces/new/", workspace.workspace_new, name="workspace_new"),
    path("api/", api.urls),
    path(ws, harness.harness_list, name="harness_list"),
    path(ws + "members/", workspace.member_list, name="member_list"),
    path(ws + "members/set/", workspace.member_set, name="member_set"),
    path(ws + "members/invite/", workspace.member_invite_view, name="member_invite"),
    path(ws + "keys/", workspace.key_list, name="key_list"),
    path(ws + "keys/<int:key_id>/revoke/", workspace.key_revoke, name="key_revoke"),
    path(ws + "keys/tool-hosts/", workspace.tool_hosts_set, name="tool_hosts_set"),
    path(ws + "audit/", workspace.audit_log, name="audit_log"),
    path(ws + "harnesses/import/", harness.harness_import, name="harness_import"),
    path(ws + "playground/", serving.playground, name="playground"),
    path(ws + "playground/reset/", serving.playground_reset, name="playground_reset"),
    path(ws + "traces/", serving.trace_list, name="trace_list"),
    path(ws + "experiments/", experiments.experiment_list, name="experiment_list"),
    path(ws + "experiments/new/", experiments.experiment_new, name="experiment_new"),
    path(ws + "experiments/<ident:key>/", experiments.experiment_detail, name="experiment_detail"),
    path(ws + "experiments/<ident:key>/archive/", experiments.experiment_archive, name="experiment_archive"),
    path(ws + "experiments/<ident:key>/delete/", experiments.experiment_delete, name="experiment_delete"),
    path(ws + "experiments/<ident:key>/<str:action>/", experiments.experiment_action, name="experiment_action"),
    path(ws + "eval/", evaluation.evaluation_home, name="evaluation_home"),
    path(ws + "eval/annotate/", evaluation.annotate, name="annotate"),
    path(ws + "eval/agreement/", evaluation.agreement, name="agreement"),
    path(ws + "eval/compare/", evaluation.compare, name="eval_compare"),
    path(ws + "eval/sets/", evaluation.eval_set_create, name="eval_set_create"),
    path(ws + "eval/sets/<ident:name>/v/<int:number>/", evaluation.eval_set_detail, name="eval_set_detail"),
    path(ws + "eval/sets/<ident:name>/archive/", evaluation.eval_set_archive, name="eval_set_archive"),
    path(ws + "eval/sets/<ident:name>/delete/", evaluation.eval_set_delete, name="eval_set_delete"),
    path(ws + "eval/runs/", evaluation.eval_run_create, name="eval_run_create"),
    path(ws + "eval/runs/<int:run_id>/", evaluation.eval_run_detail, name="eval_run_detail"),
    path(ws + "eval/runs/<int:run_id>/cancel/", evaluation.eval_run_cancel, name="eval_run_cancel"),
    path(ws + "eval/runs/<int:run_id>/results/<int:result_id>/", evaluation.eval_result_detail,
         name="eval_result_detail"),
    path(ws + "eval/runs/<int:run_id>/diagnose/", evolution.diagnosis_request, name="evolution_diagnose"),
    path(ws + "evolution/diagnoses/<int:diagnosis_id>/", evolution.diagnosis_detail, name="diagnosis_detail"),
    path(ws + "evolution/diagnoses/<int:diagnosis_id>/round/", evolution.round_create, name="evolution_round_create"),
    path(ws + "evolution/rounds/<int:round_id>/evaluate/", evolution.round_evaluate, name="evolution_round_evaluate"),
    path(ws + "evolution/rounds/<int:round_id>/promote/", evolution.round_promote, name="evolution_round_promote"),
    path(ws + "evolution/proposals/<int:proposal_id>/<str:action>/", evolution.proposal_action,
         name="evolution_proposal_action"),
    path(ws + "traces/<str:trace_id>/", serving.trace_detail, name="trace_detail"),
    path(ws + "training/", training.training_home, name="training_home"),
    path(ws + "training/jobs/", training.training_job_create, name="training_job_create"),
    path(ws + "training/jobs/<int:job_id>/", training.training_job_detail, name="training_job_detail"),
    path(ws + "training/jobs/<int:job_id>/cancel/", training.training_job_cancel, name="training_job_cancel"),
    path(ws + "training/checkpoints/<int:checkpoint_id>/promote/", training.checkpoint_promote,
         name="checkpoint_promote"),
    path(ws + "training/matrix/", training.matrix_create, name="matrix_create"),
    path(ws + "training/matrix/<int:matrix_id>/", training.matrix_detail, name="matrix_detail"),
    path(h, harness.harness_detail, name="harness_detail"),
    path(h + "archive/", harness.harness_archive, name="harness_archive"),
    path(h + "v/<int:number>/", harness.version_detail, name="version_detail"),
    path(h + "v/<int:number>/export.zip", harness.version_export, name="version_export"),
    path(h + "diff/", harness.version_diff, name="version_diff"),
    path(h + "v/<int:number>/augment/", harness.version_augment, name="version_augment"),
    path(h + "edit/", harness.harness_edit, name="harness_edit"),
    path(h + "edit/check/", harness.harness_edit_check, name="harness_edit_check"),
    path(h + "edit/preview/", harness.harness_edit_preview, name="harness_edit_preview"),
    path(h + "edit/add/", harness.harness_edit_add, name="harness_edit_add"),
    path(h + "edit/remove/", harness.harness_edit_remove, name="harness_edit_remove"),
    path(h + "edit/commit/", harness.harness_commit, name="harness_commit"),
    path(h + "edit/<str:action>/", harness.harness_draft_action, name="harness_draft_action"),
    path(h + "labels/move/", harness.label_move, name="label_move"),
    path(h + "evolution/", evolution.evolution_history, name="evolution_history"),
    path(h + "evolution/diagnose-live/", evolution.live_diagnosis_request, name="evolution_diagnose_live"),
    path(h + "evolution/keep/", evolution.keep, name="evolution_keep"),
    path(h + "labels/<ident:label>/rollback/", harness.label_rollback, name="label_rollback"),
]
