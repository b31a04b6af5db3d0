"""mrjob 0.7.4's runner options as gpumr's parser declares them, without importing mrjob (which jobs of other engines
never import): those that are flags, and those that take a value. tests/test_argv_once.py holds them equal to mrjob's
own table (:func:`gpumr.engines.mrjob.runner.runner_switches`)."""

FLAGS = frozenset("""
--add-steps-in-batch --bootstrap-mrjob --bootstrap-python --bootstrap-spark --check-input-paths
--disable-emr-debugging --emulate-map-input-file --enable-emr-debugging --no-add-steps-in-batch --no-bootstrap-mrjob
--no-bootstrap-python --no-bootstrap-spark --no-check-input-paths --no-conf --no-docker --no-emulate-map-input-file
--no-pool-clusters --no-read-logs --no-skip-internal-protocol --no-ssh-tunnel --pool-clusters --read-logs
--skip-internal-protocol --ssh-tunnel --ssh-tunnel-is-closed --ssh-tunnel-is-open
""".split())
VALUED = frozenset("""
--additional-emr-info --application --applications --archives --bootstrap --bootstrap-action --check-cluster-every
--cleanup --cleanup-on-failure --cloud-fs-sync-secs --cloud-log-dir --cloud-part-size-mb --cloud-tmp-dir
--cloud-upload-part-size --cluster-id --cluster-property --cmdenv --conf-path --core-instance-bid-price
--core-instance-config --core-instance-type --dirs --docker-client-config --docker-image --docker-mount
--ebs-root-volume-gb --ec2-endpoint --ec2-key-pair --ec2-key-pair-file --emr-action-on-failure --emr-configuration
--emr-endpoint --extra-cluster-param --files --gcloud-bin --gcp-project --gcs-region --hadoop-args --hadoop-bin
--hadoop-log-dirs --hadoop-streaming-jar --hadoop-tmp-dir --hadoop-version --iam-endpoint --iam-instance-profile
--iam-service-role --image-id --image-version --instance-fleets --instance-groups --instance-type --jobconf --label
--libjars --local-tmp-dir --master-instance-bid-price --master-instance-config --master-instance-type
--max-clusters-in-pool --max-concurrent-steps --max-mins-idle --max-output-files --min-available-mb
--min-available-virtual-cores --network --num-core-instances --num-cores --num-task-instances --owner
--pool-jitter-seconds --pool-name --pool-timeout-minutes --pool-wait-minutes --project-id --py-files --python-bin
--region --release-label --s3-endpoint --s3-region --service-account --service-account-scopes --setup --sh-bin
--sort-bin --spark-args --spark-deploy-mode --spark-master --spark-submit-bin --spark-tmp-dir --ssh-add-bin
--ssh-bin --ssh-bind-ports --subnet --subnets --tag --task-instance-bid-price --task-instance-config
--task-instance-type --task-python-bin --zone -D -c
""".split())
