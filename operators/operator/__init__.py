"""kai-operator: a Kopf operator that turns the Config `kai-config` and every SchedulingShard into the suite's
Deployments, Services, ServiceAccounts and webhook configurations (`render`, pure), and reports KAI's status
conditions on them (`status`, pure); `main` holds the Kopf handlers."""
