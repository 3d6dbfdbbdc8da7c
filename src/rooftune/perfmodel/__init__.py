"""Learned performance models of convolution primitives: features, regressors of log(time) per
primitive, classifiers of the fastest method, evaluation split by network, transfer learning to a
new platform, and a base model shipped with the package.

    data = load_profile_data(store)                      # profiled rows of this machine
    model = data.fit(PerfModel("gbr"))                   # seconds per (spec, primitive)
    evaluate(data)                                       # leave-one-network-out figures
"""



from rooftune.perfmodel.adapt import default_method as default_method
from rooftune.perfmodel.adapt import default_model, train, transfer, transferred_model_path
from rooftune.perfmodel.classifiers import (
    BASELINES,
    CLASSIFIERS,
    MethodClassifier,
    acl_rules,
    framework_default,
)
from rooftune.perfmodel.data import ProfileData, load_profile_data, rows_to_data
from rooftune.perfmodel.evaluate import evaluate, regression_metrics
from rooftune.perfmodel.features import FEATURE_SCHEMA_VERSION, FEATURES, featurize
from rooftune.perfmodel.persist import SUFFIX, convert_pickle, load_model, read_header, save_model
from rooftune.perfmodel.regressors import ESTIMATORS, PerfModel
from rooftune.perfmodel.shipped import (
    BASE_MODEL,
    BASE_MODELS,
    base_closeness,
    base_model_path,
    base_model_paths,
    describe_base,
    load_base_model,
    load_base_models,
)
from rooftune.perfmodel.transfer import (
    ADAPT_METHODS,
    METHODS,
    SAMPLERS,
    TransferEnsemble,
    TransferModel,
    check_base,
    choose_samples,
    fit_transfer,
    learning_curve,
    sample_weights,
)

__all__ = [
    "ADAPT_METHODS", "BASELINES", "BASE_MODEL", "BASE_MODELS", "CLASSIFIERS", "ESTIMATORS", "FEATURES", "FEATURE_SCHEMA_VERSION", "METHODS",
    "SAMPLERS", "SUFFIX", "MethodClassifier", "PerfModel", "ProfileData", "TransferEnsemble", "TransferModel", "acl_rules", "base_closeness", "base_model_path", "base_model_paths", "describe_base",
    "check_base", "choose_samples", "convert_pickle", "evaluate", "featurize", "fit_transfer", "framework_default", "learning_curve", "load_base_model",
    "load_base_models",
    "load_model", "load_profile_data", "read_header", "regression_metrics", "rows_to_data", "sample_weights", "save_model",
    "default_model", "train", "transfer", "transferred_model_path",
]
