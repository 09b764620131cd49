#!/bin/sh
# Each grader bare on the host, then through `gradebox exec`: the same output.
set -e
cd "$(dirname "$0")"
payload='{"output": "The answer is 42.", "workspace_path": "'"$PWD/workspace"'"}'

echo "AgentV (script grader, payload on stdin):"
echo "$payload" | python3 graders/check.py
echo "$payload" | gradebox exec -- python3 graders/check.py

echo "Vally (program grader, EVALUATE_WORKSPACE):"
echo '{"output": "42"}' | EVALUATE_WORKSPACE="$PWD/workspace" python3 graders/check.py
echo '{"output": "42"}' | EVALUATE_WORKSPACE="$PWD/workspace" \
    gradebox exec -- python3 graders/check.py

echo "plaited (the grader spawned by its absolute path; its #! line runs gradebox exec):"
record='{"input": "Who?", "output": "Dario Amodei", "hint": "dario"}'
echo "$record" | python3 "$PWD/graders/plaited_grader.py"
echo "$record" | "$PWD/graders/plaited_grader.py"
