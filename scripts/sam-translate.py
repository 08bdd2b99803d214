"""Translates a SAM template into the plain CloudFormation it deploys as, offline.

Usage: sam-translate.py TEMPLATE OUTPUT.json

Local code folders are first pointed at S3, as `sam package` does before a deploy.
The AWS::Serverless-2016-10-31 transform runs locally with AWS's own translator
(aws-sam-translator, pinned through aws-sam-cli in scripts/setup.sh), so that cfn-lint can
check every generated resource's properties; cfn-lint run on the SAM source itself does not
see the properties SAM passes through. No AWS call is made: the template names no managed
policy that would need looking up.
"""

import json
import os
import sys

# The pseudo-parameters (AWS::Region) need a region; no metadata-service lookup for one.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class NoManagedPolicies:
    """SAM asks for the managed-policy name map only when a template uses a policy by name."""

    def load(self):
        return {}


def packaged(template):
    """Points local CodeUri/ContentUri folders at S3, as `sam package` does before deploying
    (the translator accepts only S3 locations)."""
    function_globals = template.get("Globals", {}).get("Function", {})
    if "CodeUri" in function_globals:
        function_globals["CodeUri"] = "s3://sluice-artifacts/code.zip"
    for name, resource in template.get("Resources", {}).items():
        props = resource.get("Properties") or {}
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str) and not props[key].startswith("s3://"):
                props[key] = f"s3://sluice-artifacts/{name}.zip"


def main():
    source, target = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as f:
        template = yaml_parse(f.read())
    packaged(template)
    translated = transform(template, {}, NoManagedPolicies())
    with open(target, "w", encoding="utf-8") as f:
        json.dump(translated, f, indent=1)


if __name__ == "__main__":
    main()
