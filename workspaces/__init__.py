"""The ground floor: workspaces, members and roles, who is asking (Actor) and what they may do, the audit log,
background jobs and the shared-cache tokens that guard what a process remembers. Imports no other app."""
